from observer.cli.main import main

main()
