from spyrec.cli import entry

entry()
