"""Programs that tests launch under mpiexec (python -m mpi_programs.<name>)."""
