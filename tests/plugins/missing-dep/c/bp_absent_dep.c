/* The shared library bp-test-missing-dep links against; it is never installed. */
int bp_absent_dep_value(void) { return 42; }
