// The data-analysis demo in the code-interpreter image: upload a customers
// CSV, run a pandas + seaborn script that draws PNG charts and writes a
// markdown report, download them, and check the report's numbers against
// figures computed here from the same CSV.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { TEST_TIMEOUT, createSandbox, destroy } from "./lib.mjs";

const REGIONS = ["Central", "East", "North", "South", "West"];

// mulberry32 is a small seeded PRNG, so that the data set is the same on
// every run.
function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// customers returns 1000 rows; spend is kept in integer cents so that the
// expected sums are exact.
function customers() {
  const rand = mulberry32(20240601);
  const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
  return Array.from({ length: 1000 }, (_, i) => ({
    id: 1001 + i,
    // Some names need CSV quoting.
    name: i % 7 === 0 ? `"Doe, J${i}" the ${i}th` : `Customer ${i}`,
    age: int(18, 80),
    region: REGIONS[int(0, REGIONS.length - 1)],
    signup: `${int(2021, 2024)}-${String(int(1, 12)).padStart(2, "0")}-${String(int(1, 28)).padStart(2, "0")}`,
    orders: int(0, 40),
    cents: int(0, 500_000),
  }));
}

const csvField = (s) => (/[",\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s);
const toCSV = (rows) =>
  "customer_id,name,age,region,signup_date,orders,total_spend\n" +
  rows.map((r) => [r.id, csvField(r.name), r.age, r.region, r.signup, r.orders, (r.cents / 100).toFixed(2)].join(",")).join("\n") +
  "\n";

const ANALYSIS = `
import os
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

df = pd.read_csv("customers.csv", parse_dates=["signup_date"])
out = "report"
os.makedirs(out, exist_ok=True)
by_region = df.groupby("region").agg(
    customers=("customer_id", "count"),
    avg_spend=("total_spend", "mean"),
    total_spend=("total_spend", "sum"),
).sort_index()

sns.set_theme()
charts = {
    "age_distribution.png": lambda ax: sns.histplot(df["age"], bins=20, ax=ax),
    "spend_by_region.png": lambda ax: sns.barplot(x=by_region.index, y=by_region["avg_spend"], ax=ax),
    "orders_vs_spend.png": lambda ax: sns.scatterplot(data=df, x="orders", y="total_spend", hue="region", ax=ax),
}
for name, draw in charts.items():
    fig, ax = plt.subplots(figsize=(8, 5))
    draw(ax)
    fig.savefig(os.path.join(out, name), dpi=100)
    plt.close(fig)

with open(os.path.join(out, "report.md"), "w") as f:
    f.write("# Customer report\\n\\n")
    f.write(f"- Customers: {len(df)}\\n")
    f.write(f"- Mean age: {df['age'].mean():.2f}\\n")
    f.write(f"- Total spend: {df['total_spend'].sum():.2f}\\n")
    f.write(f"- Median orders: {df['orders'].median()}\\n")
    f.write(f"- Signups in 2024: {(df['signup_date'].dt.year == 2024).sum()}\\n\\n")
    f.write("| Region | Customers | Avg spend | Total spend |\\n|---|---|---|---|\\n")
    for region, row in by_region.iterrows():
        f.write(f"| {region} | {int(row.customers)} | {row.avg_spend:.2f} | {row.total_spend:.2f} |\\n")
print("wrote", ", ".join(sorted(os.listdir(out))))
`;

let sb;
before(async () => {
  sb = await createSandbox();
});
after(async () => {
  await destroy(sb);
});

test("upload a CSV, chart and report it with pandas and seaborn, download the results", TEST_TIMEOUT, async () => {
  const rows = customers();
  await sb.files.writeFiles([
    { path: "/workspace/customers.csv", data: toCSV(rows) },
    { path: "/workspace/analysis.py", data: ANALYSIS },
  ]);
  const ex = await sb.commands.run("python3 analysis.py", { workingDirectory: "/workspace" });
  assert.equal(ex.exitCode, 0, `analysis failed: ${JSON.stringify(ex.error)} ${ex.logs.stderr.map((m) => m.text).join("\n")}`);
  const charts = ["age_distribution.png", "orders_vs_spend.png", "spend_by_region.png"];
  assert.deepEqual(ex.logs.stdout.map((m) => m.text), [`wrote ${[...charts, "report.md"].sort().join(", ")}`]);

  const listed = await sb.files.listDirectory({ path: "/workspace/report", depth: 1 });
  assert.deepEqual(listed.map((f) => f.path), [...charts, "report.md"].sort().map((n) => `/workspace/report/${n}`));

  for (const name of charts) {
    const png = Buffer.from(await sb.files.readBytes(`/workspace/report/${name}`));
    assert.ok(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])), `${name}: PNG signature`);
    assert.equal(png.subarray(12, 16).toString("latin1"), "IHDR", `${name}: IHDR first`);
    // 8x5 inches at 100 dpi.
    assert.deepEqual([png.readUInt32BE(16), png.readUInt32BE(20)], [800, 500], `${name}: size`);
    assert.equal(png.subarray(-8, -4).toString("latin1"), "IEND", `${name}: complete`);
  }

  const report = await sb.files.readFile("/workspace/report/report.md");
  const field = (label) => {
    const m = report.match(new RegExp(`^- ${label}: (\\S+)$`, "m"));
    assert.ok(m, `report has no "${label}" line:\n${report}`);
    return Number(m[1]);
  };
  const close = (got, want, what) => assert.ok(Math.abs(got - want) < 0.006, `${what}: report says ${got}, want ${want.toFixed(2)}`);

  const sum = (xs) => xs.reduce((a, b) => a + b, 0);
  const ages = rows.map((r) => r.age);
  const orders = rows.map((r) => r.orders).sort((a, b) => a - b);
  assert.equal(field("Customers"), 1000);
  close(field("Mean age"), sum(ages) / ages.length, "mean age");
  close(field("Total spend"), sum(rows.map((r) => r.cents)) / 100, "total spend");
  assert.equal(field("Median orders"), (orders[499] + orders[500]) / 2);
  assert.equal(field("Signups in 2024"), rows.filter((r) => r.signup.startsWith("2024-")).length);

  const table = [...report.matchAll(/^\| (\w+) \| (\d+) \| ([\d.]+) \| ([\d.]+) \|$/gm)];
  assert.deepEqual(table.map((m) => m[1]), REGIONS, `one table row per region:\n${report}`);
  for (const [, region, count, avg, total] of table) {
    const cents = rows.filter((r) => r.region === region).map((r) => r.cents);
    assert.equal(Number(count), cents.length, `${region}: customers`);
    close(Number(avg), sum(cents) / cents.length / 100, `${region}: average spend`);
    close(Number(total), sum(cents) / 100, `${region}: total spend`);
  }
});
