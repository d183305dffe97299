/* commands.h - subcommands of the `sotto` command-line tool. Each takes the
 * arguments after the program name (argv[0] is the subcommand) and returns
 * the process exit code: 0 success, 1 failure, 2 usage error. */
#ifndef SOTTO_CLI_COMMANDS_H
#define SOTTO_CLI_COMMANDS_H

int sotto_cmd_transcribe(int argc, char **argv);
int sotto_cmd_encode(int argc, char **argv);
int sotto_cmd_info(int argc, char **argv);
int sotto_cmd_mel(int argc, char **argv);
int sotto_cmd_tokens(int argc, char **argv);
int sotto_cmd_quantize(int argc, char **argv);
int sotto_cmd_calibrate(int argc, char **argv);

/* Default model directory: $SOTTO_MODEL, else <dir of the executable>/../models/tiny.en
 * if it exists, else models/tiny.en. Returns a static buffer. */
const char *sotto_cli_default_model(void);

#endif
