"""Rendering episodes to GIF or MP4 frames with captions."""
