import os
import sys

from pipeline.cli import main

try:
    sys.exit(main())
except BrokenPipeError:  # `show-config | head`: the reader left; stop quietly, as a shell tool does
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # the final flush must not raise again
    sys.exit(141)  # 128 + SIGPIPE, what the shell reports for a tool killed by it
