"""``python -m d5core`` runs the ``d5`` command."""

from d5core.cli.app import main

main()
