"""Where an epoch happens: the training loop (trainer), where it may stop and resume within an epoch
(stop_points), what an epoch records (epoch_record), the optimiser (optim), the test evaluation after the last epoch
(final_eval), the process's stops and signals (process), and several processes as one run (distributed, sync_bn).

May import evaluation, methods, attacks, data, models, runtime and contract; never the entry points.
"""
