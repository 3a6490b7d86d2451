"""The scheduler view: host states from the records, filters and weighers."""
