"""`python -m tightpipe ARGS...`: the `tightpipe` binary (tightpipe.cli.find_binary) with ARGS."""

from tightpipe.cli import main

if __name__ == "__main__":
    main()
