"""``python -m embodied`` runs the CLI."""

from embodied.apps.cli import main

if __name__ == "__main__":
    main()
