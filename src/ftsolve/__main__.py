from ftsolve.cli import main

main()
