"""Rendering episodes to GIF or MP4 frames with captions.

* :mod:`alem_eval.rendering.episode`: ``alem-eval render``'s library side: the team and the
  options checked, one episode played and written (``render_team``, ``render_episode``,
  ``algorithm_clips`` for reports), ``RenderResult``.
* :mod:`alem_eval.rendering.player`: ``EpisodePlayer``, the fast protocol's episode ``i``
  stepped from the host (one jitted env + policy step per call), ``EpisodeStep``.
* :mod:`alem_eval.rendering.frames`: a frame from a state (alem's pixel renderer per agent,
  side by side) and its caption (``FrameDrawer``, ``caption_lines``, ``compose_frame``).
* :mod:`alem_eval.rendering.writers`: ``GifWriter``, ``Mp4Writer`` (ffmpeg), ``gif_frames``.
"""
