# A package, so these modules' names (test_registry, test_same_numbers) do not clash with tests/models and
# tests/studies/engine under pytest's default import mode.
