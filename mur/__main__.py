from mur.cli.main import main

main()
