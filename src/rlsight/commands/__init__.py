"""Subcommands of the ``rlsight`` CLI, one module each (see ``rlsight.cli``)."""
