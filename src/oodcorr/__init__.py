"""oodcorr: do OOD results generalise? OOD scores correlated across checkpoints, the in-domain score regressed out."""

__version__ = "0.1.0"
