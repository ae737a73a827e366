"""Bind: tie each harvested kernel to a reference and a launch, or record why not."""
