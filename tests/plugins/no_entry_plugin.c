/* A shared object that is not a ferry plugin: it exports no entry symbol. */
int not_a_plugin(void) { return 1; }
