"""Starting and controlling runs: the launcher, the local queue and its workers, Slurm, sweeps, following a run
as it streams, the GPU inventory, and stop, resume and delete.

Imports fairtui.runs and engine.contract; never the judging, tuning, command-line or app packages."""
