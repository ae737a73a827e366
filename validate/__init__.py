"""sftbuild.validate stage."""
