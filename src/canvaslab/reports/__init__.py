"""Terminal tables (rich) for study results."""
