"""`python -m fairtui`: the same as the `fairtui` command."""

from fairtui.console import main

main()
