"""Tiny random configs of the real Hugging Face classes, saved offline for tests.

Each builder writes a folder that the project's loaders open through ``from_pretrained``, as
they would a real checkpoint: nothing is downloaded. Imported by tests as ``tiny_hf.<module>``
(pytest puts ``tests/`` on ``sys.path`` for the ``unit``, ``ray_tests`` and ``dist_tests``
packages).
"""
