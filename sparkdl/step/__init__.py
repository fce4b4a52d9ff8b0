"""The training step: a batch's summed gradient (whole, per partition group or split across threads) and the update."""
from sparkdl.step.gradient import gradient_sum, grouped_gradient_sum, sum_reduction
from sparkdl.step.rows import rows_independent, rows_splittable
from sparkdl.step.threads import MIN_ROWS_PER_THREAD, split_gradient_sum, task_gradient_sum
from sparkdl.step.update import train_step

__all__ = ["sum_reduction", "gradient_sum", "grouped_gradient_sum", "train_step", "rows_independent",
           "rows_splittable", "split_gradient_sum", "task_gradient_sum", "MIN_ROWS_PER_THREAD"]
