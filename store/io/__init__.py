"""The file-system layer: the fs seam, mapped files, the lock/abort files, atomic files, the clock."""
