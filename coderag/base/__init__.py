"""What every layer needs and nothing here needs from them: settings, errors, where an index lives, the writer
lock and the owner's hand-over, path globs, text for the agent, heap trimming. Imports nothing from coderag
outside this package."""
