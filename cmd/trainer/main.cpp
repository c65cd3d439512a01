// trainer: entry point (subcommands are registered from their own files).
int main() { return 0; }
