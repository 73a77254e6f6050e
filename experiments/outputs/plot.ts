/**
 * SVG plots of an experiment's runs, rendered headless by Vega-Lite (no browser, no canvas).
 * A plot names its axes by run fields: `policy`, `seed`, any swept parameter (its config path,
 * e.g. `workload.arrival.ratePerS`, or `model` / `hardware`), or a metric path prefixed with
 * `metrics.` (e.g. `metrics.tpotMs.mean`); relative columns (`rel:<metric>`) come from
 * `output.relative`. Several seeds of one point are averaged by Vega-Lite's `mean`.
 */
import type * as vl from 'vega-lite';
import { z } from 'zod';
import { metricAt } from './table.ts';

export const PlotSchema = z
  .object({
    /** File name (without .svg). */
    name: z.string().regex(/^[\w.-]+$/),
    title: z.string().optional(),
    x: z.string(),
    y: z.string(),
    series: z.string().default('policy'),
    /** Small multiples: one panel per value of this field. */
    facet: z.string().optional(),
    kind: z.enum(['line', 'bar']).default('line'),
    logX: z.boolean().default(false),
    logY: z.boolean().default(false),
  })
  .strict();
export type PlotSpec = z.infer<typeof PlotSchema>;

export interface PlotRun {
  readonly policy: string;
  readonly seed: number;
  readonly params: Readonly<Record<string, unknown>>;
  readonly metrics: Readonly<Record<string, unknown>>;
  readonly relative?: Readonly<Record<string, number>>;
}

/** The value of a plot field for a run. */
export function fieldOf(run: PlotRun, field: string): unknown {
  if (field === 'policy') return run.policy;
  if (field === 'seed') return run.seed;
  if (field.startsWith('metrics.')) return metricAt(run.metrics, field.slice('metrics.'.length));
  if (field.startsWith('rel:')) return run.relative?.[field.slice(4)];
  const v = run.params[field];
  return typeof v === 'object' && v !== null ? JSON.stringify(v) : v;
}

export async function renderPlot(spec: PlotSpec, runs: readonly PlotRun[]): Promise<string> {
  const values = runs.map((r) => ({
    x: fieldOf(r, spec.x),
    y: fieldOf(r, spec.y),
    series: String(fieldOf(r, spec.series)),
    ...(spec.facet ? { facet: String(fieldOf(r, spec.facet)) } : {}),
  }));
  const xNumeric = values.every((v) => typeof v.x === 'number');
  const order = [...new Set(values.map((v) => v.series))];
  const encoding: Record<string, unknown> = {
    x: {
      field: 'x',
      type: xNumeric && spec.kind === 'line' ? 'quantitative' : 'ordinal',
      title: spec.x,
      sort: null,
      ...(spec.logX ? { scale: { type: 'log' } } : {}),
    },
    y: {
      field: 'y',
      type: 'quantitative',
      aggregate: 'mean',
      title: spec.y,
      ...(spec.logY ? { scale: { type: 'log' } } : {}),
    },
    color: { field: 'series', type: 'nominal', title: spec.series, sort: order },
  };
  // Bars of several series side by side; one full-width bar per x when the series is x itself.
  if (spec.kind === 'bar' && spec.series !== spec.x) encoding.xOffset = { field: 'series', sort: order };
  else if (spec.kind === 'bar') (encoding.y as Record<string, unknown>).stack = null;
  const unit = {
    mark: spec.kind === 'line' ? { type: 'line', point: true } : { type: 'bar' },
    encoding,
  };
  const top = spec.facet
    ? {
        data: { values },
        facet: { field: 'facet', type: 'nominal', title: spec.facet },
        columns: 3,
        spec: { width: 260, height: 180, ...unit },
        resolve: { scale: { y: 'independent' } },
      }
    : { data: { values }, width: 480, height: 300, ...unit };
  const full = {
    $schema: 'https://vega.github.io/schema/vega-lite/v5.json',
    title: spec.title ?? spec.name,
    ...top,
  } as unknown as vl.TopLevelSpec;
  // Imported here, not at the top: vega takes about a second to load, and the schema above is
  // imported by every command (a CLI that only reports an error must answer at once).
  const [vega, vegaLite] = await Promise.all([import('vega'), import('vega-lite')]);
  const view = new vega.View(vega.parse(vegaLite.compile(full).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
