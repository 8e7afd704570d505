"""`python -m gradcam_cli` runs the `gradcam` command."""
from .cli import main

if __name__ == "__main__":
    main()
