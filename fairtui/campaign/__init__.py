"""Judging a new method in one command (`fairtui judge`): the runs a verdict needs, trained on the local queue's
slots, and the paired comparison read as they land. Above judging and launching, which it joins."""
