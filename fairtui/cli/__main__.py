from fairtui.cli import main

main()
