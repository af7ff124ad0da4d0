"""The ``train`` settings of the CPU text configs (LiBai's GPT-2, BERT, RoBERTa and T5): small batches, a
perplexity evaluation every 100 iterations, no periodic checkpoints.  Each config adds its output folder and how
many layers its pipeline splits."""
from libai.config import LazyCall
from libai.evaluation import PPLEvaluator

from .train import train

train.train_micro_batch_size = 8
train.test_micro_batch_size = 8
train.train_iter = 200
train.warmup_ratio = 0.05
train.log_period = 10
train.checkpointer.period = 100000  # no periodic checkpoints
train.evaluation.evaluator = LazyCall(PPLEvaluator)()
train.evaluation.eval_period = 100
train.evaluation.eval_iter = 4  # batches per evaluation; main also sizes its validation set by it
train.evaluation.eval_metric = "lm_loss_PPL"
train.evaluation.eval_mode = "min"
train.seed = 1234
