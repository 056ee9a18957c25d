"""`python -m fairtui`: the same as the `fairtui` command."""

from fairtui.cli import main

main()
