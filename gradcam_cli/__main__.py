"""`python -m gradcam_cli` runs the `gradcam` command."""

from gradcam_cli.cli.app import main

if __name__ == "__main__":
    main()
