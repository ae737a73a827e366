"""sftbuild.harvest stage."""
