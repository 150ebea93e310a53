"""The studies: each a function that runs an experiment and writes its results, plus a CLI command."""
