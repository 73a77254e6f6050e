/**
 * `moesim trace import --format <f>`: picks the importer of an engine's trace format and
 * writes a moesim trace (see `common.ts` for what is checked and how the file is written).
 */
import { UserError } from '../../sim/kernel/errors.ts';
import { writeImport, type ImportPass, type ImportShape } from './common.ts';
import {
  ASSUMPTIONS,
  ENGINE_FORMATS,
  impPass,
  llamacppPass,
  megatronPass,
  vllmPass,
  type EngineOptions,
} from './engines.ts';
import { parquetPass, type ParquetColumns } from './parquet.ts';

export const IMPORT_FORMATS = [...ENGINE_FORMATS, 'parquet'] as const;
export type ImportFormat = (typeof IMPORT_FORMATS)[number];

export interface FormatImportOptions extends EngineOptions {
  readonly modelId?: string;
  readonly columns?: ParquetColumns;
  readonly gzipLevel?: number;
}

export async function importFormat(
  format: string,
  input: string,
  out: string,
  o: FormatImportOptions = {},
): Promise<{ requests: number; tokens: number; shape: ImportShape & { experts: number }; assumes: string }> {
  if (!(IMPORT_FORMATS as readonly string[]).includes(format)) {
    throw new UserError(`unknown format (one of ${IMPORT_FORMATS.join(', ')})`, undefined, '--format', format);
  }
  const f = format as ImportFormat;
  const open = (): ImportPass => {
    switch (f) {
      case 'vllm':
      case 'sglang':
        return vllmPass(input, f, o);
      case 'megatron':
        return megatronPass(input, o);
      case 'llamacpp':
        return llamacppPass(input, o);
      case 'imp':
        return impPass(input, o);
      case 'parquet':
        return parquetPass(input, {
          ...(o.columns ? { columns: o.columns } : {}),
          ...(o.experts ? { experts: o.experts } : {}),
          ...(o.topK ? { topK: o.topK } : {}),
        });
    }
  };
  const assumes = `imported from the ${f} format; ${ASSUMPTIONS[f]}${f === 'imp' && o.segment ? ` (segments of ${o.segment} tokens)` : ''}`;
  const r = await writeImport(
    input,
    out,
    open,
    { format: f, describe: assumes },
    {
      ...(o.experts ? { experts: o.experts } : {}),
      ...(o.modelId ? { modelId: o.modelId } : {}),
      ...(o.gzipLevel !== undefined ? { gzipLevel: o.gzipLevel } : {}),
    },
  );
  return { ...r, assumes };
}
