// Offline checks of deploy/kubernetes: every YAML document parses, and every Kubernetes object
// (overlay patches merged into their base object first) validates against the Kubernetes
// object schemas of kubernetes-models, strictly: the schemas allow unknown fields, which the
// API server drops without a word, so a field the schema's validator never reads is reported
// as unknown (a misspelt field). --self-test: a correct object passes and misspelt fields,
// a wrong type and a missing required field are each caught.
//   node validate.mjs DIR...       (exit 1 on any finding)
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { parseAllDocuments } from "yaml";

const SKIP_GROUPS = new Set(["kustomize.config.k8s.io"]);

// apps/v1 + StatefulSet -> IoK8sApiAppsV1StatefulSet; v1 -> IoK8sApiCoreV1...
function schemaName(apiVersion, kind) {
    const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["core", apiVersion];
    const g = group.replace(/\.k8s\.io$/, "").split(".").map((s) => s[0].toUpperCase() + s.slice(1)).join("");
    return `IoK8sApi${g}${version[0].toUpperCase()}${version.slice(1)}${kind}`;
}

async function validator(apiVersion, kind) {
    const name = schemaName(apiVersion, kind);
    try {
        return (await import(`kubernetes-models/_schemas/${name}`)).validate;
    } catch {
        return null;
    }
}

// Wraps value so that every property the validator reads, and every object whose keys it
// enumerates (maps: labels, data, ...), is recorded.
function tracked(value, path, records) {
    if (value === null || typeof value !== "object")
        return value;
    const rec = { path, value, read: new Set(), enumerated: false };
    records.push(rec);
    const children = new Map();
    return new Proxy(value, {
        get(t, k, r) {
            if (typeof k !== "string" || !Object.hasOwn(t, k))
                return Reflect.get(t, k, r);
            rec.read.add(k);
            if (!children.has(k))
                children.set(k, tracked(t[k], `${path}/${k}`, records));
            return children.get(k);
        },
        has(t, k) {
            rec.read.add(k);
            return Reflect.has(t, k);
        },
        ownKeys(t) {
            rec.enumerated = true;
            return Reflect.ownKeys(t);
        },
    });
}

// Findings for one object: schema errors and unknown fields.
export async function check(obj) {
    if (!obj || typeof obj !== "object" || !obj.apiVersion || !obj.kind)
        return ["not a Kubernetes object (no apiVersion and kind)"];
    const validate = await validator(obj.apiVersion, obj.kind);
    if (!validate)
        return [`no schema for ${obj.apiVersion} ${obj.kind}`];
    const records = [];
    const ok = validate(tracked(obj, "", records));
    const out = ok ? [] : validate.errors.map((e) => `${e.instancePath || "/"}: ${e.message || e.keyword} ${JSON.stringify(e.params)}`);
    for (const r of records) {
        if (Array.isArray(r.value) || r.enumerated)
            continue;
        for (const k of Object.keys(r.value))
            if (!r.read.has(k))
                out.push(`${r.path}/${k}: unknown field`);
    }
    return out;
}

function merge(base, patch) {
    if (Array.isArray(patch) || patch === null || typeof patch !== "object" ||
        base === null || typeof base !== "object" || Array.isArray(base))
        return structuredClone(patch);
    const out = structuredClone(base);
    for (const [k, v] of Object.entries(patch))
        out[k] = k in out ? merge(out[k], v) : structuredClone(v);
    return out;
}

function yamlFiles(dir) {
    const out = [];
    for (const name of readdirSync(dir).sort()) {
        const p = join(dir, name);
        if (statSync(p).isDirectory())
            out.push(...yamlFiles(p));
        else if (/\.ya?ml$/.test(name) && !name.startsWith("."))
            out.push(p);
    }
    return out;
}

function load(file) {
    const docs = [];
    for (const d of parseAllDocuments(readFileSync(file, "utf8"))) {
        if (d.errors.length)
            throw new Error(`${file}: ${d.errors[0].message}`);
        const v = d.toJS();
        if (v !== null)
            docs.push(v);
    }
    return docs;
}

async function checkDir(dir) {
    const findings = [];
    let objects = 0;
    const byKey = new Map(); // kind/namespace/name -> object, for overlays' patches
    const patches = [];
    for (const file of yamlFiles(dir)) {
        const rel = relative(process.cwd(), file);
        let docs;
        try {
            docs = load(file);
        } catch (e) {
            findings.push(e.message);
            continue;
        }
        const patch = isPatch(file);
        for (const d of docs) {
            if (SKIP_GROUPS.has((d.apiVersion || "").split("/")[0]))
                continue;
            if (patch) {
                patches.push({ file: rel, d });
                continue;
            }
            byKey.set(`${d.kind}/${d.metadata?.namespace}/${d.metadata?.name}`, d);
            objects++;
            for (const f of await check(d))
                findings.push(`${rel}: ${d.kind} ${d.metadata?.name}: ${f}`);
        }
    }
    for (const { file, d } of patches) {
        const base = byKey.get(`${d.kind}/${d.metadata?.namespace}/${d.metadata?.name}`);
        if (!base) {
            findings.push(`${file}: patches ${d.kind} ${d.metadata?.name}, which is not in the base`);
            continue;
        }
        objects++;
        for (const f of await check(merge(base, d)))
            findings.push(`${file}: ${d.kind} ${d.metadata?.name} (patched): ${f}`);
    }
    return { findings, objects };
}

// A file listed under "patches" by the kustomization.yaml next to it.
function isPatch(file) {
    const dir = join(file, "..");
    try {
        const k = load(join(dir, "kustomization.yaml")).find((d) => d.kind === "Kustomization");
        return (k?.patches || []).some((p) => join(dir, p.path) === file);
    } catch {
        return false;
    }
}

async function selfTest() {
    const good = {
        apiVersion: "apps/v1", kind: "StatefulSet", metadata: { name: "x", labels: { a: "b" } },
        spec: {
            serviceName: "s", replicas: 3, selector: { matchLabels: { a: "b" } },
            template: {
                metadata: { labels: { a: "b" } },
                spec: { containers: [{ name: "c", image: "i", securityContext: { privileged: true } }] },
            },
        },
    };
    const cases = [
        ["correct", good, null],
        ["misspelt spec field", merge(good, { spec: { replica: 3 } }), "/spec/replica: unknown field"],
        ["misspelt container field", structuredClone(good), "/spec/template/spec/containers/0/imagePullPolicyy: unknown field"],
        ["misspelt top-level field", merge(good, { specc: {} }), "/specc: unknown field"],
        ["wrong type", merge(good, { spec: { replicas: "three" } }), "/spec/replicas"],
        ["missing required field", merge(good, { spec: { selector: undefined } }), "selector"],
    ];
    cases[2][1].spec.template.spec.containers[0].imagePullPolicyy = "Always";
    delete cases[5][1].spec.selector;
    let failed = 0;
    for (const [name, obj, want] of cases) {
        const got = await check(obj);
        const pass = want === null ? got.length === 0 : got.some((f) => f.includes(want));
        if (!pass) {
            failed++;
            console.error(`self-test ${name}: expected ${want === null ? "no finding" : JSON.stringify(want)}, got ${JSON.stringify(got)}`);
        }
    }
    console.log(`self-test: ${cases.length - failed} passed, ${failed} failed`);
    return failed;
}

const args = process.argv.slice(2);
let failed = 0;
if (args[0] === "--self-test") {
    failed = await selfTest();
    args.shift();
}
for (const dir of args) {
    const { findings, objects } = await checkDir(dir);
    for (const f of findings)
        console.error(f);
    console.log(`${dir}: ${objects} objects, ${findings.length} findings`);
    failed += findings.length;
}
process.exit(failed ? 1 : 0);
