"""Generate the bundled demo gene records (genes.csv, genes.fasta, proteins.jsonl).

The proteins are well-known public sequences (UniProt entries named below, typed from the
public records; treat them as illustrative, not letter-exact references). Each is
back-translated into a synthetic coding sequence for an organism with that organism's
most frequent codon per amino acid (a public codon-usage fact) 60 % of the time and a
uniformly chosen synonymous codon otherwise. A few deliberately defective records show
how preparation reports dropped records. Deterministic: `python3 make_demo.py` rewrites
the same files. Standard library only.
"""
import csv
import json
import random

PROTEINS = {
    "insulin (P01308)": "MALWMRLLPLLALLALWGPDPAAAFVNQHLCGSHLVEALYLVCGERGFFYTPKTRREAEDLQVGQVELGGGPGAGSLQPLALEGSLQKRGIVEQCCTSICSLYQLENYCN",
    "ubiquitin (P0CG48 unit)": "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG",
    "green fluorescent protein (P42212)": "MSKGEELFTGVVPILVELDGDVNGHKFSVSGEGEGDATYGKLTLKFICTTGKLPVPWPTLVTTFSYGVQCFSRYPDHMKQHDFFKSAMPEGYVQERTIFFKDDGNYKTRAEVKFEGDTLVNRIELKGIDFKEDGNILGHKLEYNYNSHNVYIMADKQKNGIKVNFKIRHNIEDGSVQLADHYQQNTPIGDGPVLLPDNHYLSTQSALSKDPNEKRDHMVLLEFVTAAGITLGMDELYK",
    "hemoglobin beta (P68871)": "MVHLTPEEKSAVTALWGKVNVDEVGGEALGRLLVVYPWTQRFFESFGDLSTPDAVMGNPKVKAHGKKVLGAFSDGLAHLDNLKGTFATLSELHCDKLHVDPENFRLLGNVLVCVLAHHFGKEFTPPVQAAYQKVVAGVANALAHKYH",
    "hemoglobin alpha (P69905)": "MVLSPADKTNVKAAWGKVGAHAGEYGAEALERMFLSFPTTKTYFPHFDLSHGSAQVKGHGKKVADALTNAVAHVDDMPNALSALSDLHAHKLRVDPVNFKLLSHCLLVTLAAHLPAEFTPAVHASLDKFLASVSTVLTSKYR",
    "thioredoxin 1 (P0AA25)": "MSDKIIHLTDDSFDTDVLKADGAILVDFWAEWCGPCKMIAPILDEIADEYQGKLTVAKLNIDQNPGTAPKYGIRGIPTLLLFKNGEVAASKVGALSKGQLKEFLDANLA",
    "cytochrome c (P99999)": "MGDVEKGKKIFIMKCSQCHTVEKGGKHKTGPNLHGLFGRKTGQAPGYSYTAANKNKGIIWGEDTLMEYLENPKKYIPGTKMIFVGIKKKEERADLIAYLKKATNE",
    "calmodulin (P0DP23)": "MADQLTEEQIAEFKEAFSLFDKDGDGTITTKELGTVMRSLGQNPTEAELQDMINEVDADGNGTIDFPEFLTMMARKMKDTDSEEEIREAFRVFDKDGNGYISAAELRHVMTNLGEKLTDEEVDEMIREADIDGDGQVNYEEFVQMMTAK",
    "acyl carrier protein (P0A6A8)": "MSTIEERVKKIIGEQLGVKQEEVTNNASFVEDLGADSLDTVELVMALEEEFDTEIPDEEAEKITTVQAAIDYINGHQA",
    "histone H4 (P62805)": "MSGRGKGGKGLGKGGAKRHRKVLRDNIQGITKPAIRRLARRGGVKRISGLIYEETRGVLKVFLENVIRDAVTYTEHAKRKTVTAMDVVYALKRQGRTLYGFGG",
    "protein G B1 domain": "MTYKLILNGKTLKGETTTEAVDAATAEKVFKQYANDNGVDGEWTYDDATKTFTVTE",
    "lysozyme C (P00698, mature)": "MKVFGRCELAAAMKRHGLDNYRGYSLGNWVCAAKFESNFNTQATNRNTDGSTDYGILQINSRWWCNDGRTPGSRNLCNIPCSALLSSDITASVNCAKKIVSDGNGMNAWVAWRNRCKGTDVQAWIRGCRL",
}

# Most frequent codon per amino acid (and stop) in each organism's genes.
PREFERRED = {
    "Escherichia coli general": "A:GCG C:TGC D:GAT E:GAA F:TTT G:GGC H:CAT I:ATT K:AAA L:CTG M:ATG N:AAC P:CCG Q:CAG R:CGT S:AGC T:ACC V:GTG W:TGG Y:TAT _:TAA",
    "Homo sapiens": "A:GCC C:TGC D:GAC E:GAG F:TTC G:GGC H:CAC I:ATC K:AAG L:CTG M:ATG N:AAC P:CCC Q:CAG R:AGA S:AGC T:ACC V:GTG W:TGG Y:TAC _:TGA",
    "Mus musculus": "A:GCC C:TGC D:GAC E:GAG F:TTC G:GGC H:CAC I:ATC K:AAG L:CTG M:ATG N:AAC P:CCT Q:CAG R:AGG S:AGC T:ACC V:GTG W:TGG Y:TAC _:TGA",
    "Saccharomyces cerevisiae": "A:GCT C:TGT D:GAT E:GAA F:TTT G:GGT H:CAT I:ATT K:AAA L:TTG M:ATG N:AAT P:CCA Q:CAA R:AGA S:TCT T:ACT V:GTT W:TGG Y:TAT _:TAA",
    "Arabidopsis thaliana": "A:GCT C:TGT D:GAT E:GAG F:TTC G:GGA H:CAT I:ATT K:AAG L:CTT M:ATG N:AAT P:CCT Q:CAA R:AGA S:TCT T:ACT V:GTT W:TGG Y:TAC _:TGA",
    "Bacillus subtilis": "A:GCA C:TGT D:GAT E:GAA F:TTT G:GGC H:CAT I:ATT K:AAA L:TTA M:ATG N:AAT P:CCG Q:CAA R:CGT S:AGC T:ACA V:GTT W:TGG Y:TAT _:TAA",
}

BASES = "ACGT"
CODE = "KNKNTTTTRSRSIIMIQHQHPPPPRRRRLLLLEDEDAAAAGGGGVVVV_Y_YSSSS_CWCLFLF"
SYNONYMS = {}
for i, aa in enumerate(CODE):
    codon = BASES[i // 16] + BASES[i // 4 % 4] + BASES[i % 4]
    SYNONYMS.setdefault(aa, []).append(codon)


def back_translate(protein, organism, rng):
    pref = dict(kv.split(":") for kv in PREFERRED[organism].split())
    codons = []
    for aa in protein + "_":
        codons.append(pref[aa] if rng.random() < 0.6 else rng.choice(SYNONYMS[aa]))
    return "".join(codons)


def main():
    rng = random.Random(2024)
    organisms = list(PREFERRED)
    rows = []
    for k, (name, protein) in enumerate(PROTEINS.items()):
        for j in range(3):
            organism = organisms[(k + 2 * j) % len(organisms)]
            dna = back_translate(protein, organism, rng)
            # Give the protein column for some rows and leave it to translation for others.
            rows.append((name, dna, protein + "_" if j == 0 else "", organism))
    # Defective records, to show how preparation reports what it drops.
    ub = PROTEINS["ubiquitin (P0CG48 unit)"]
    good = back_translate(ub, "Homo sapiens", rng)
    rows.append(("defect: internal stop", good[:30] + "TAA" + good[33:], "", "Homo sapiens"))
    rows.append(("defect: length not a multiple of 3", good[:-1], "", "Homo sapiens"))
    rows.append(("defect: unknown organism", good, "", "Homo sapien"))
    rows.append(("defect: no start codon", "CCC" + good[3:], "", "Homo sapiens"))

    with open("genes.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["name", "dna", "protein", "organism"])
        w.writerows(rows)
    with open("genes.fasta", "w") as f:
        for name, dna, _, organism in rows[:12]:
            f.write(f">{name} [organism={organism}]\n")
            for i in range(0, len(dna), 70):
                f.write(dna[i : i + 70] + "\n")
    with open("proteins.jsonl", "w") as f:
        for k, (name, protein) in enumerate(list(PROTEINS.items())[:6]):
            f.write(json.dumps({"protein": protein, "dna": "", "organism": organisms[k % len(organisms)]}) + "\n")
        f.write(json.dumps({"protein": "MAV", "dna": "ATGGCTGTG", "organism": 51}) + "\n")
        f.write(json.dumps({"protein": "MKV?", "organism": "Homo sapiens"}) + "\n")
        f.write(json.dumps({"protein": "MKV", "organism": "E. coli"}) + "\n")


if __name__ == "__main__":
    main()
