"""Reading what jobs print: signatures, the live classifier, torchrun ranks, kernel lines."""
