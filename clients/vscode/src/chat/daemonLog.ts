/**
 * The daemon's stderr as log records for VS Code's log output channel.
 *
 * The daemon writes `2026-12-01 19:35:05,123 INFO imprintd.chat: message` (imprintd/cli.py);
 * a log channel adds its own timestamp and level, so each line goes out at the daemon's level
 * without the daemon's timestamp. Lines that start no record (a traceback's) keep the level of
 * the record they continue.
 */

export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

export interface LogRecord {
  level: LogLevel;
  text: string;
}

const RECORD = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d+)? (DEBUG|INFO|WARNING|ERROR|CRITICAL) (.*)$/;

const LEVELS: Record<string, LogLevel> = { DEBUG: "debug", INFO: "info", WARNING: "warn", ERROR: "error", CRITICAL: "error" };

export class DaemonLog {
  /** What a line that starts no record is logged as: the level of the record it continues. */
  private level: LogLevel = "info";

  /** One line of the daemon's stderr (without its newline). */
  line(text: string): LogRecord {
    const match = RECORD.exec(text);
    if (!match) return { level: this.level, text };
    this.level = LEVELS[match[1]];
    return { level: this.level, text: match[2] };
  }
}
