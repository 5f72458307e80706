"""``python -m dpaudit``: the ``dpaudit`` console script."""

from dpaudit.cli import main

if __name__ == "__main__":
    main()
