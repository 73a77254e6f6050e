/**
 * What a `moesim worker` checks in a job from the Redis queue before it imports anything the job
 * names (experiments/parallel/job-check.ts): shape, config hash, unsafe keys (`__proto__` in a
 * sweep path), the config valid and unchanged by validation, the run key, and plugin paths inside
 * the config's folder or the worker's checkout. Also: a `__proto__` sweep key in a config file is
 * rejected by validation and no object of the process gains a property.
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { UserError } from '../../sim/kernel/errors.ts';
import { parseConfigText, validateConfig } from '../../experiments/config/load.ts';
import { checkJob, configHash } from '../../experiments/parallel/job-check.ts';
import { REPO_ROOT } from '../helpers/cli.ts';

const GOOD = validateConfig(
  parseConfigText(
    `name: good
model: olmoe
hardware: rtx4090
workload: { requests: 2, promptTokens: { kind: fixed, tokens: 4 }, outputTokens: { kind: fixed, tokens: 2 } }
policies:
  - path: ../examples/fifo-cache-policy.ts
`,
    'x.yaml',
  ),
);

const job = (over: Record<string, unknown> = {}, config: unknown = GOOD): Record<string, unknown> => {
  const task = {
    config: JSON.parse(JSON.stringify(config)),
    file: 'cfg.yaml',
    baseDir: path.join(REPO_ROOT, 'experiments'),
    index: 0,
    key: JSON.stringify([0, 'fifo', {}, 1]),
    timeline: false,
  };
  return { task, root: REPO_ROOT, configHash: configHash(task), ...over };
};

const fails = (data: unknown, ...mentions: string[]) => {
  let err: unknown;
  try {
    checkJob(data, REPO_ROOT);
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(UserError);
  const line = (err as UserError).oneLine();
  expect(line.includes('\n')).toBe(false);
  for (const m of mentions) expect(line).toContain(m);
};

describe('a worker checks a job before importing anything', () => {
  it('accepts a good job and maps its folder onto this checkout', () => {
    const t = checkJob(job(), REPO_ROOT);
    expect(t.baseDir).toBe(path.join(REPO_ROOT, 'experiments'));
  });

  it('rejects a malformed job, a wrong hash, a bad run key', () => {
    fails(null, 'malformed job');
    fails({ task: 3 }, 'job.task', '3');
    fails(job({ configHash: 'deadbeef' }), 'job.configHash', 'does not match');
    const j = job();
    (j.task as Record<string, unknown>).key = '[5,"x",{},1]';
    fails(j, 'job.task.key', 'malformed run key');
  });

  it('rejects __proto__ anywhere in the job, and leaves Object.prototype alone', () => {
    const raw = JSON.parse(`{"sweep": {"workload.__proto__.maxBatchSize": [8]}}`);
    const poisoned = { ...JSON.parse(JSON.stringify(GOOD)), ...raw };
    const j = job({}, poisoned);
    (j as Record<string, unknown>).configHash = configHash(j.task as never);
    fails(j, 'sweep.workload.__proto__.maxBatchSize', '__proto__');
    fails(JSON.parse(`{"__proto__": {"polluted": 1}, "task": {}}`), '__proto__');
    expect(({} as Record<string, unknown>).maxBatchSize).toBeUndefined();
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('rejects a config that is not valid or not as this moesim validates it', () => {
    const j = job({}, { ...JSON.parse(JSON.stringify(GOOD)), workload: { requests: -1 } });
    (j as Record<string, unknown>).configHash = configHash(j.task as never);
    fails(j, 'workload');
  });

  it('loads plugins only from the config folder or its own checkout', () => {
    const outside = { ...JSON.parse(JSON.stringify(GOOD)), policies: [{ path: '/tmp/evil/policy.ts', params: {} }] };
    const j = job({}, outside);
    (j as Record<string, unknown>).configHash = configHash(j.task as never);
    fails(j, 'policies[0].path', 'only from the config’s folder', '/tmp/evil/policy.ts');
  });
});

describe('a config with __proto__ in a sweep path', () => {
  for (const key of ['workload.__proto__.maxBatchSize', 'executor.constructor.x', 'workload.prototype']) {
    it(`${key}: one line naming the key`, () => {
      const text = `model: olmoe\nhardware: rtx4090\nworkload: { requests: 2 }\npolicies: [{ name: on-demand }]\nsweep:\n  ${key}: [8]\n`;
      expect(() => validateConfig(parseConfigText(text, 'c.yaml'), 'c.yaml')).toThrow(UserError);
      try {
        validateConfig(parseConfigText(text, 'c.yaml'), 'c.yaml');
      } catch (e) {
        expect((e as UserError).oneLine()).toContain(`sweep.${key}`);
      }
    });
  }
});
