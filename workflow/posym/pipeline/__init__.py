"""The workflow's plumbing: configuration and its schemas, studies and their plans, claims, figures and tables,
provenance and the versioned report."""
