"""The pure core: typed spec, plan, lifecycle states, conclusion of an attempt, policy, step.

Nothing here reads a file, a clock or a process: time and evidence are passed in, so
every rule is a function tested without sleeping."""
