"""What every layer of the engine runs on: the device, precision and compilation settled once (device,
compiled), seeding and generator states (seeding), a model's mode for a block (modes), checkpoints and their files
(checkpoint), weight averages (averaging), the per-class counts (metrics), a run's provenance and its CPU
(provenance, cpuload), and where its progress and numbers go (progress, sinks, wandb_log).

May import engine.contract alone (and torch).
"""
