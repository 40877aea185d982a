from spyrec.cli import main

main()
