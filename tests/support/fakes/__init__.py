"""In-repo fakes of exactly the cloud SDK calls our runtimes make, backed by local processes."""
