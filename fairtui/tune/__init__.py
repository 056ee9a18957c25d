"""Tuning a method's settings with Optuna (the extra ``fairtui[tune]``): the study and its driver, the search
space and objective, the journal of a study's settings, and the trials as runs.

Imports fairtui.launch, fairtui.runs and engine.contract (Optuna only here); never the command line or the app."""
