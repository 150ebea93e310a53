"""One small reader per study: the only code that knows a study's files.

Each reader turns a study folder's outputs into a plain view the report draws from, filling what older
files lack with ``None`` and a note, never failing on a missing optional key. When a study's files change
(a move to the study engine's store, for one), only its reader changes.
"""

