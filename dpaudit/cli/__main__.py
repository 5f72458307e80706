"""``python -m dpaudit.cli``: the console script (the supervised child runs this)."""

from dpaudit.cli import main

if __name__ == "__main__":
    main()
