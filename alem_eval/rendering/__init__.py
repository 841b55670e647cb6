"""Rendering episodes to GIF or MP4 frames with captions.

* :mod:`alem_eval.rendering.episode`: ``alem-eval render``'s library side: the team (cells,
  and a focal agent in some slots) and the options checked, one episode played through
  the one orchestration and written (``render_episode``, ``plan_render`` for
  ``--dry-run``, ``algorithm_clips`` for reports), ``RenderResult``.
* :mod:`alem_eval.rendering.player`: ``EpisodeSteps``, the recorder of states the play
  core hands each step of the fast protocol's episode ``i`` to, as ``EpisodeStep`` s.
* :mod:`alem_eval.rendering.frames`: a frame from a state (alem's pixel renderer per agent,
  side by side) and its caption (``FrameDrawer``, ``caption_lines``, ``compose_frame``).
* :mod:`alem_eval.rendering.writers`: ``GifWriter``, ``Mp4Writer`` (ffmpeg), ``gif_frames``.
"""
