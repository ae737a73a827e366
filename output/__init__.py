"""sftbuild.output stage."""
