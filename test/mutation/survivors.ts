/**
 * `npx tsx test/mutation/survivors.ts <report.json>...`: the score and the surviving mutants of
 * Stryker JSON reports (reports/mutation/<folder>.json), one line each with its source line and
 * replacement, for deciding which survivors a new test should kill and documenting the rest.
 */
import { readFileSync } from 'node:fs';
import { mutationScore } from './folders.ts';

interface ReportMutant {
  readonly mutatorName: string;
  readonly replacement?: string;
  readonly status: string;
  readonly location: { readonly start: { readonly line: number; readonly column: number } };
}
interface Report {
  readonly files: Record<string, { readonly source: string; readonly mutants: readonly ReportMutant[] }>;
}

for (const path of process.argv.slice(2)) {
  const report = JSON.parse(readFileSync(path, 'utf8')) as Report;
  const counts: Record<string, number> = {};
  const lines: string[] = [];
  for (const [file, { source, mutants }] of Object.entries(report.files)) {
    const src = source.split('\n');
    for (const m of mutants) {
      counts[m.status] = (counts[m.status] ?? 0) + 1;
      if (m.status !== 'Survived' && m.status !== 'NoCoverage') continue;
      const line = m.location.start.line; // 1-based in the report schema
      const code = (src[line - 1] ?? '').trim().slice(0, 90);
      const repl = (m.replacement ?? '').replace(/\s+/g, ' ').slice(0, 60);
      lines.push(`${file}:${line} ${m.mutatorName} ${m.status} → ${repl}\n    ${code}`);
    }
  }
  console.log(`${path}: ${JSON.stringify(counts)} score ${(mutationScore(counts) * 100).toFixed(1)} %`);
  for (const l of lines) console.log(l);
}
