"""The batch-size study (seeds 000-002): does row 0's result depend on what shares its batch?"""

from canvaslab.studies.batch_size.study import BatchStudySettings, run_batch_study

__all__ = ["BatchStudySettings", "run_batch_study"]
