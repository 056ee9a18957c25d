"""Measuring a model per class: a split's clean and attacked predictions, counted per class (evaluate),
for the validation after every epoch, the test evaluation and `fairtui eval`.

May import attacks, data, models, runtime and contract; never methods, training or the entry points.
"""
