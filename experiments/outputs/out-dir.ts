/**
 * The output folder, checked before anything is simulated: a path that cannot be created or
 * written (a file in the way, a read-only filesystem, a special filesystem such as /proc,
 * missing permission) is a `UserError` on the `--out` argument, found in milliseconds.
 *
 * The check leaves nothing behind: when the folder does not exist yet, it probes its nearest
 * existing ancestor by creating and removing a scratch folder there, so bad input elsewhere
 * (found later, in preflight) still leaves no output folder. `makeOutDir` creates the folder
 * afterwards, one level at a time: Node's recursive `mkdir` never returns on some special
 * filesystems (`mkdir -p /proc/x` loops on ENOENT), so it is not used on a path not yet checked.
 */
import { closeSync, mkdirSync, openSync, rmdirSync, statSync, unlinkSync, writeSync } from 'node:fs';
import path from 'node:path';
import { UserError } from '../../sim/kernel/errors.ts';

const REASONS: Record<string, string> = {
  EROFS: 'read-only file system',
  EACCES: 'permission denied',
  EPERM: 'operation not permitted',
  ENOENT: 'the filesystem does not allow creating it',
  ENOSPC: 'no space left on the device',
  EDQUOT: 'disk quota exceeded',
  ENAMETOOLONG: 'name too long',
  ENOTDIR: 'a file is in the way',
  EEXIST: 'a file is in the way',
};

const why = (err: unknown): string => {
  const code = (err as NodeJS.ErrnoException).code ?? '';
  return REASONS[code] ? `${REASONS[code]}, ${code}` : code || String(err);
};

/** The existing part of `abs`: its nearest ancestor (or itself) that exists, and what it is. */
function nearestExisting(abs: string, flag: string): { dir: string; isDir: boolean } {
  let p = abs;
  for (;;) {
    try {
      return { dir: p, isDir: statSync(p).isDirectory() };
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ENOTDIR')
        throw new UserError(`cannot use this output folder: ${p}: ${why(err)}`, undefined, flag, abs);
      const up = path.dirname(p);
      if (up === p) return { dir: p, isDir: false };
      p = up;
    }
  }
}

/**
 * Throws a `UserError` (field `flag`: the command-line flag that named the folder) unless
 * `outDir` exists as a writable folder or can be created. Creates nothing that stays.
 */
export function checkOutDir(outDir: string, flag = '--out'): void {
  const abs = path.resolve(outDir);
  const fail = (message: string): never => {
    throw new UserError(message, undefined, flag, outDir);
  };
  if (outDir.trim() === '') fail('must name a folder (it is empty)');
  const { dir, isDir } = nearestExisting(abs, flag);
  if (!isDir)
    fail(
      dir === abs
        ? `is a file, not a folder: ${dir}`
        : `cannot create the output folder: ${dir} is a file, not a folder`,
    );
  const probe = path.join(dir, `.moesim-write-check-${process.pid}`);
  if (dir === abs) {
    // The folder exists: can we create a file in it?
    try {
      const fd = openSync(probe, 'wx');
      try {
        writeSync(fd, 'x');
      } finally {
        closeSync(fd);
      }
      unlinkSync(probe);
    } catch (err) {
      fail(`cannot write in the output folder ${dir} (${why(err)})`);
    }
    return;
  }
  // It does not exist yet: can we create a folder in its nearest existing ancestor?
  try {
    mkdirSync(probe);
    rmdirSync(probe);
  } catch (err) {
    fail(`cannot create the output folder: no folder can be made in ${dir} (${why(err)})`);
  }
}

/**
 * A config's `name` as one folder name under `results/`: characters other than letters, digits,
 * `.`, `_` and `-` become `_`, and leading dots are dropped, so `../../x` cannot leave `results/`.
 */
export function folderName(name: string): string {
  const safe = name.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '');
  return safe.length > 0 ? safe.slice(0, 200) : 'experiment';
}

/** `text` with control characters (ESC, newline, ...) escaped, safe to print on a terminal. */
export function printable(text: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is this function's job.
  return text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) =>
    JSON.stringify(c)
      .slice(1, -1)
      .replace(/^\\u00/, '\\x'),
  );
}

/** Creates `outDir` and its missing parents, one level at a time (errors name `flag`). */
export function makeOutDir(outDir: string, flag = '--out'): void {
  const abs = path.resolve(outDir);
  const missing: string[] = [];
  let p = abs;
  for (;;) {
    try {
      if (statSync(p).isDirectory()) break;
      throw new UserError(`cannot create the output folder: ${p} is a file, not a folder`, undefined, flag, outDir);
    } catch (err) {
      if (err instanceof UserError) throw err;
      const up = path.dirname(p);
      if (up === p) break;
      missing.push(p);
      p = up;
    }
  }
  for (const dir of missing.reverse()) {
    try {
      mkdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EEXIST') continue;
      throw new UserError(`cannot create the output folder ${dir} (${why(err)})`, undefined, flag, outDir);
    }
  }
}
