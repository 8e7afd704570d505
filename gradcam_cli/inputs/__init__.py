"""Where images come from: arguments, folders, globs, stdin; each a Source with its output name. Stat only; nothing is decoded here."""
