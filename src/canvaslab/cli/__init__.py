"""The ``canvaslab`` command. One module per command group; each registers itself on ``app``."""
